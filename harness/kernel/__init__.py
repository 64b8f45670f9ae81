"""The method kernel: the method contract, its typed fields, ops, selection, covariance, validation."""

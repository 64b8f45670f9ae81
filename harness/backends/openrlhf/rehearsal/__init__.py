"""The OpenRLHF CPU rehearsal: stand-ins for vLLM/CUDA, assets, checks."""

"""Runs INSIDE the sandbox (copied next to the program): executes the program and reports on fd 3.

The job arrives as one JSON line on stdin (``nonce``, ``mode`` and mode fields). The report is written as
``<nonce> <json>`` on fd 3 only after the program and its tests completed; a program that exits early
(``os._exit(0)``, ``sys.exit(0)`` in a test script) therefore leaves no report and fails. Expected outputs of
stdin/stdout and call-based tests never enter the sandbox: this runner returns what the program printed or
returned and the grader compares outside.

Modes: ``script`` (HumanEval/MBPP: prog.py holds solution + tests), ``stdio`` (LiveCodeBench standard
input/output: prog.py runs once per case), ``call`` (LiveCodeBench LeetCode-style: call ``fn_name``),
``pytest`` (KodCode: solution.py + test_solution.py; real pytest when importable, else a small runner).
"""

import io
import json
import os
import signal
import sys
import traceback


def _short_error(exc):
    tb = traceback.extract_tb(exc.__traceback__)
    where = ""
    for fr in reversed(tb):
        if fr.filename.endswith(("prog.py", "solution.py", "test_solution.py", "<prog>")):
            where = " (line %s)" % fr.lineno
            break
    return ("%s: %s" % (type(exc).__name__, exc))[:300] + where


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("case time limit")


def _read_prog(name="prog.py"):
    with open(name) as f:
        return f.read()


def run_script(job):
    code = compile(_read_prog(), "prog.py", "exec")
    try:
        exec(code, {"__name__": "__main__", "__file__": "prog.py", "__builtins__": __builtins__})
    except SystemExit as e:
        return {"ok": False, "error": "SystemExit(%r) before the tests finished" % (e.code,)}
    except BaseException as e:  # noqa: BLE001
        return {"ok": False, "error": _short_error(e)}
    return {"ok": True}


def _capture_exec(code, stdin_text, cap):
    real_in, real_out = sys.stdin, sys.stdout
    out_buf = io.BytesIO()
    fake_in = io.TextIOWrapper(io.BytesIO(stdin_text.encode()), encoding="utf-8")
    fake_out = io.TextIOWrapper(out_buf, encoding="utf-8", write_through=True)
    sys.stdin, sys.stdout = fake_in, fake_out
    err = None
    try:
        exec(code, {"__name__": "__main__", "__file__": "prog.py", "__builtins__": __builtins__})
    except SystemExit as e:
        if e.code not in (None, 0):
            err = "SystemExit(%r)" % (e.code,)
    except _Timeout:
        err = "timeout"
    except BaseException as e:  # noqa: BLE001
        err = _short_error(e)
    finally:
        sys.stdin, sys.stdout = real_in, real_out
    try:
        fake_out.flush()
    except Exception:  # noqa: BLE001 - the program may have closed it
        pass
    data = out_buf.getvalue() if not out_buf.closed else b""
    return data[:cap].decode("utf-8", "replace"), err, len(data) > cap


def run_stdio(job):
    code = compile(_read_prog(), "prog.py", "exec")
    cases = []
    signal.signal(signal.SIGALRM, _alarm)
    for case in job["cases"]:
        signal.alarm(int(job.get("case_timeout", 6)))
        out, err, trunc = _capture_exec(code, case.get("input", ""), job.get("max_output", 1 << 20))
        signal.alarm(0)
        cases.append({"stdout": out, "error": err, "truncated": trunc})
        if err and job.get("stop_on_error", True):
            break
    return {"cases": cases}


def _jsonable(x):
    if isinstance(x, tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return repr(x)


def run_call(job):
    import copy

    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(_read_prog(), "prog.py", "exec"), ns)
    except SystemExit as e:
        return {"error": "SystemExit(%r) while loading the program" % (e.code,)}
    except BaseException as e:  # noqa: BLE001
        return {"error": _short_error(e)}
    fn_name = job["fn_name"]
    if "Solution" in ns and hasattr(ns["Solution"], fn_name):
        target = lambda *a: getattr(ns["Solution"](), fn_name)(*a)  # noqa: E731
    elif callable(ns.get(fn_name)):
        target = ns[fn_name]
    else:
        return {"error": "no function %r (or Solution.%s) defined" % (fn_name, fn_name)}
    signal.signal(signal.SIGALRM, _alarm)
    cases = []
    for case in job["cases"]:
        signal.alarm(int(job.get("case_timeout", 6)))
        try:
            res, err = _jsonable(target(*copy.deepcopy(case["args"]))), None
        except SystemExit as e:
            res, err = None, "SystemExit(%r)" % (e.code,)
        except _Timeout:
            res, err = None, "timeout"
        except BaseException as e:  # noqa: BLE001
            res, err = None, _short_error(e)
        signal.alarm(0)
        cases.append({"result": res, "error": err})
        if err:
            break
    return {"cases": cases}


# ---- a small pytest stand-in for interpreters without pytest ----------------------------------------
_SHIM = """
import math as _m
class _Raises:
    def __init__(self, exc, match=None): self.exc, self.match, self.value = exc, match, None
    def __enter__(self): return self
    def __exit__(self, t, v, tb):
        if t is None: raise AssertionError("DID NOT RAISE %r" % (self.exc,))
        if not issubclass(t, self.exc): return False
        if self.match is not None:
            import re
            assert re.search(self.match, str(v)), "pattern %r not in %r" % (self.match, str(v))
        self.value = v
        return True
def raises(exc, *args, match=None, **kw):
    if args:
        with _Raises(exc, match): args[0](*args[1:], **kw)
        return None
    return _Raises(exc, match)
class approx:
    def __init__(self, expected, rel=1e-6, abs=1e-12): self.e, self.rel, self.abs = expected, rel, abs
    def _eq(self, a, e):
        if isinstance(e, (list, tuple)): return len(a) == len(e) and all(self._eq(x, y) for x, y in zip(a, e))
        return abs(a - e) <= max(self.rel * abs(e), self.abs)
    def __eq__(self, other): return self._eq(other, self.e)
class _Mark:
    def parametrize(self, names, values, **kw):
        def deco(fn):
            fn.__dict__.setdefault("_params", []).append(([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names), list(values)))
            return fn
        return deco
    def __getattr__(self, name): return lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda f: f))
mark = _Mark()
def fixture(*a, **k):
    return a[0] if a and callable(a[0]) else (lambda f: f)
"""


def _mini_pytest():
    import importlib
    import inspect
    import itertools
    import types

    if "pytest" not in sys.modules:
        shim = types.ModuleType("pytest")
        exec(_SHIM, shim.__dict__)
        sys.modules["pytest"] = shim
    mod = importlib.import_module("test_solution")
    passed, failures = 0, []
    for name, fn in sorted(vars(mod).items()):
        if not (name.startswith("test") and inspect.isfunction(fn)):
            continue
        params = getattr(fn, "_params", [])
        calls = [{}]
        for names, values in params:
            new = []
            for base, v in itertools.product(calls, values):
                vals = v if len(names) > 1 else (v,)
                new.append({**base, **dict(zip(names, vals))})
            calls = new
        for kwargs in calls:
            missing = [p for p in inspect.signature(fn).parameters if p not in kwargs]
            if missing:
                failures.append("%s needs pytest fixtures %s" % (name, missing))
                continue
            try:
                fn(**kwargs)
                passed += 1
            except SystemExit as e:
                failures.append("%s: SystemExit(%r)" % (name, e.code))
            except BaseException as e:  # noqa: BLE001
                failures.append("%s: %s" % (name, _short_error(e)))
    return passed, failures


def run_pytest(job):
    sys.path.insert(0, os.getcwd())
    try:
        import pytest  # noqa: F401

        real = True
    except ImportError:
        real = False
    if real:

        class Counter:
            passed, failed = 0, []

            def pytest_runtest_logreport(self, report):
                if report.when == "call" and report.passed:
                    Counter.passed += 1
                elif report.failed:
                    Counter.failed.append("%s: %s" % (report.nodeid, str(report.longrepr).splitlines()[-1:]))

        import pytest as _pt

        rc = _pt.main(["-q", "-p", "no:cacheprovider", "-x", "test_solution.py"], plugins=[Counter()])
        passed, failures = Counter.passed, Counter.failed
        if int(rc) not in (0,) and not failures:
            failures = ["pytest exit code %s" % int(rc)]
    else:
        try:
            passed, failures = _mini_pytest()
        except BaseException as e:  # noqa: BLE001 - collection error (import of solution failed, ...)
            if isinstance(e, SystemExit):
                return {"ok": False, "error": "SystemExit(%r) during collection" % (e.code,)}
            return {"ok": False, "error": "collection: " + _short_error(e)}
    if passed == 0 and not failures:
        return {"ok": False, "error": "no tests ran"}
    return {
        "ok": not failures,
        "passed": passed,
        "error": "; ".join(failures)[:500] or None,
        "runner": "pytest" if real else "builtin",
    }


def main():
    job = json.loads(sys.stdin.readline())
    nonce = job.pop("nonce")
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
    report_fd = os.dup(3)
    os.close(3)
    report = {"script": run_script, "stdio": run_stdio, "call": run_call, "pytest": run_pytest}[job["mode"]](job)
    data = (nonce + " " + json.dumps(report) + "\n").encode()
    while data:
        data = data[os.write(report_fd, data) :]
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the program may have closed or replaced them
            pass
    os._exit(0)  # skip atexit/finalizers the program may have registered


if __name__ == "__main__":
    main()

"""Crash-safe file writes for run directories: atomic replace (tmp + os.replace) and line-by-line JSONL appends.

Every file written here gets the mode a plain ``open()`` would give under the process umask (``mkstemp`` alone
makes 0600, which hides runs from labmates on a shared project directory); scripts get the execute bits too.
A JSONL file whose last line was torn by a kill is repaired with ``repair_jsonl`` before appending again.
Python signal handlers (submitit's requeue handler calls ``sys.exit`` from SIGUSR2) run after an atomic write, not
inside it: an exception raised in the middle of ``torch.save`` turns into torch's "unexpected pos" error and
loses the requeue.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _json_default(obj: Any):
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _finite(obj: Any) -> Any:
    """NaN/inf are not JSON; write them as null (a missing value), never as a fake number."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_file(path: str | os.PathLike, flag: str = "") -> Path:
    """Refuse an output file path that cannot be written, naming the user's path: a directory, a parent that is a
    file, or a folder without write permission. ``flag`` (e.g. ``--out``) prefixes the message."""
    path, head = Path(path), f"{flag} {path}" if flag else str(path)
    if path.is_dir():
        raise ValueError(f"{head}: is a directory; give a file path")
    _check_writable_folder(head, _existing_ancestor(path.parent))
    return path


def check_output_dir(path: str | os.PathLike, flag: str = "") -> Path:
    """Refuse an output folder that is an existing file or cannot be created or written, naming the path."""
    path, head = Path(path), f"{flag} {path}" if flag else str(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{head}: is a file; give a folder")
    _check_writable_folder(head, _existing_ancestor(path))
    return path


def _check_writable_folder(head: str, base: Path) -> None:
    """``base`` (the nearest existing folder of an output path) can hold new files; the error names ``head``."""
    if not base.is_dir():
        raise ValueError(f"{head}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError(f"{head}: no permission to write in {base}")


def current_umask() -> int:
    """The process umask (read from /proc when possible: setting it to read it races with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode(executable: bool = False) -> int:
    """The mode ``open()`` (0666) or a script (0777) gets under the umask."""
    return (0o777 if executable else 0o666) & ~current_umask()


_DEFERRED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2") if hasattr(signal, name)
)


@contextmanager
def signal_handlers(handlers: dict):
    """Install ``{signal: handler}`` for the block and put the old handlers back after it; yields the old ones.
    Main thread only (Python allows no other): elsewhere nothing is installed and it yields {}."""
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    old = {s: signal.signal(s, h) for s, h in handlers.items()}
    try:
        yield old
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_deferred():
    """Python-level handlers of SIGINT/SIGTERM/SIGUSR1/SIGUSR2 that arrive inside the block run when it ends, in
    arrival order (default and ignored dispositions are left alone). Main thread only; elsewhere a no-op."""
    arrived: list[tuple[int, Any]] = []

    def collect(signum, frame):
        arrived.append((signum, frame))

    old: dict = {}
    try:
        with signal_handlers({s: collect for s in _DEFERRED_SIGNALS if callable(signal.getsignal(s))}) as old:
            yield
    finally:
        for signum, frame in arrived:
            old[signum](signum, frame)


@contextmanager
def signals_interrupt():
    """SIGINT and SIGTERM raise ``KeyboardInterrupt`` at once inside the block (set-up, where there is nothing to
    save yet). A sweep job needs it: submitit's job process ignores SIGTERM ("Bypassing signal"), so the SIGTERM
    that stops a local sweep's cell was swallowed until the trainer's own handler was installed. Main thread only."""

    def handler(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    with signal_handlers({signal.SIGINT: handler, signal.SIGTERM: handler}):
        yield


class StopRequested(Exception):
    """Ctrl-C / SIGTERM arrived (``signals_stop_flag``); the loop stops at the next step boundary after a
    checkpoint."""


@contextmanager
def signals_stop_flag(flag: dict):
    """The first SIGINT/SIGTERM inside the block sets ``flag["stop"]`` (its name), which a training loop checks
    between steps to checkpoint and stop; a second one raises ``KeyboardInterrupt`` at once. Main thread only."""

    def handler(signum, frame):
        if flag.get("stop"):
            raise KeyboardInterrupt
        flag["stop"] = signal.Signals(signum).name

    with signal_handlers({signal.SIGINT: handler, signal.SIGTERM: handler}):
        yield


def _os_error_in(e: BaseException) -> OSError | None:
    """The OS error behind ``e``: itself, or one it arose from (torch's zip writer turns a failed write into
    RuntimeError "unexpected pos", with the ENOSPC as its context)."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno is not None:
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _write_error(path: Path, e: OSError) -> ValueError:
    """An OS error of a write as one line naming the user's file (a full disk says so, with the path)."""
    return ValueError(f"cannot write {path}: {e.strerror or e}")


def atomic_write(
    path: str | os.PathLike, write: Callable[[Any], None], mode: str = "w", executable: bool = False
) -> Path:
    """Write through ``write(fileobj)`` into a temp file next to ``path``, fsync, then ``os.replace``; the file
    gets the umask's mode (``executable``: with the execute bits). Signal handlers wait for the replace."""
    with signals_deferred():
        return _atomic_write(Path(path), write, mode, executable)


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str, executable: bool) -> Path:
    check_output_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # name the user's path, not the temp file
        raise ValueError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        os.fchmod(fd, file_mode(executable))
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os_error = _os_error_in(e)
        if os_error is not None:  # ENOSPC, EROFS, EDQUOT, ...: named with the user's path
            raise _write_error(path, os_error) from None
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, executable: bool = False) -> Path:
    return atomic_write(path, lambda f: f.write(text), executable=executable)


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    text = json.dumps(_finite(obj), indent=indent, default=_json_default, sort_keys=False) + "\n"
    return atomic_write_text(path, text)


def atomic_save_torch(path: str | os.PathLike, obj: Any) -> Path:
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), mode="wb")


def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one JSON object as one line and flush it to disk (a killed run keeps every finished line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(_finite(record), default=_json_default) + "\n"
    try:
        with open(path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise _write_error(path, e) from None


def json_row(record: dict) -> dict:
    """``record`` as a JSONL reader gets it back (NaN/inf as None, numpy/torch scalars as numbers)."""
    return json.loads(json.dumps(_finite(record), default=_json_default))


def repair_jsonl(path: str | os.PathLike) -> int:
    """Cut a torn last line (a writer killed mid-append) so the next append starts a fresh line.

    Returns the number of bytes removed (0 when the file ends with a newline or does not exist). Only bytes after
    the last newline are removed: every complete line survives.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        pos = size
        keep = 0
        while pos > 0:  # scan back in blocks for the last newline
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            i = block.rfind(b"\n")
            if i >= 0:
                keep = pos + i + 1
                break
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return size - keep


def jsonl_lines(
    path: str | os.PathLike, on_bad: Callable[[int, str], None] | None = None, *, torn_tail: bool = False
) -> list[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of a JSONL file (gzip-compressed when it ends in ``.gz``),
    each line decoded as UTF-8 on its own: the one JSONL reader. A line that is not UTF-8 or not JSON goes to
    ``on_bad(line number, why)`` and is left out; without ``on_bad`` it is a ``ValueError`` ``PATH:LINE: why``.
    ``torn_tail``: a bad last line (a writer killed mid-append) is left out silently. A file that cannot be read is
    a ``ValueError`` naming it."""
    path = Path(path)
    lines = _read_bytes(path, gz=path.name.endswith(".gz")).splitlines()
    out = []
    for ln, data in enumerate(lines, 1):
        if not data.strip():
            continue
        try:
            out.append((ln, json.loads(data.decode("utf-8"))))
            continue
        except UnicodeDecodeError as e:
            why = f"not UTF-8 text (byte {e.object[e.start]:#04x} at column {e.start + 1})"
        except json.JSONDecodeError as e:
            why = f"not valid JSON ({e.msg} at column {e.colno})"
        if torn_tail and ln == len(lines):
            break
        if on_bad is None:
            raise ValueError(f"{path}:{ln}: {why}")
        on_bad(ln, why)
    return out


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The rows of a JSONL file that a writer may still append to ([] when it does not exist): a torn last line
    (killed mid-write) is skipped, any other bad line is an error naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    return [row for _, row in jsonl_lines(path, torn_tail=True)]


def read_json_rows(path: str | os.PathLike) -> list:
    """The rows of a data file: a ``.json`` file holding one list, else JSON lines (``.jsonl``, ``.jsonl.gz``, or a
    ``.json`` file of lines); every problem is a ``ValueError`` naming the file."""
    path = Path(path)
    if path.name.lower().endswith(".json"):
        text = read_text(path)
        if text.lstrip().startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    return [row for _, row in jsonl_lines(path)]


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> Path:
    """Atomically replace a JSONL file with ``records``."""
    text = "".join(json.dumps(_finite(r), default=_json_default) + "\n" for r in records)
    return atomic_write_text(path, text)


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file; undecodable bytes or an OS error become one ``ValueError`` naming the file."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})") from None
    except OSError as e:
        raise _cannot_read(path, e) from None


def _read_bytes(path: Path, gz: bool = False) -> bytes:
    """A file's bytes (decompressed with ``gz``); an OS error becomes one ``ValueError`` naming the file."""
    try:
        if not gz:
            return path.read_bytes()
        import gzip

        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError) as e:  # EOFError: a cut gzip stream
        raise _cannot_read(path, e) from None


def _cannot_read(path: Path, e: OSError | EOFError) -> ValueError:
    if isinstance(e, IsADirectoryError):
        return ValueError(f"{path}: is a directory, not a file")
    return ValueError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e or type(e).__name__})")


def _strict_loader():
    """A ``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently: a
    second ``train:`` block would replace the first, a second ``grid:`` drop cells)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        loader.flatten_mapping(node)
        seen: dict = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it itself
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line {first}); "
                    f"a second one would silently replace the first",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    # YAML 1.2's scientific notation: YAML 1.1 (PyYAML) reads 2e-3, 1e9 and 1.0e9 as strings (it wants a dot and a
    # signed exponent). Only forms with an exponent are added, so integers and plain decimals resolve as before.
    import re

    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return StrictLoader


def load_yaml(text: str, where: str = "") -> Any:
    """Parse YAML (safe types only) refusing duplicate keys; errors are ``yaml.YAMLError`` whose first line names
    the problem and its line."""
    import yaml

    return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass


def yaml_problem(e: Exception) -> str:
    """A YAML error as one line: the problem and where (line, column)."""
    import yaml

    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        problem = e.problem or e.context or "invalid YAML"
        if "duplicate key" in problem:
            return problem
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def read_yaml_mapping(
    path: str | os.PathLike, error: type[Exception], what: str, expected: str, empty: str | None = None
) -> dict:
    """A YAML file that must hold a mapping; ``error`` names the file and the problem. An empty (or comment-only)
    file is ``{}``, or refused when ``empty`` says what to write instead."""
    import yaml

    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a directory; give {what} file")
    if not path.is_file():
        raise FileNotFoundError(f"{what.removeprefix('a ')} not found: {path}")
    try:
        data = load_yaml(read_text(path))
    except ValueError as e:
        raise error(str(e)) from None
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {yaml_problem(e)}") from None
    if data is None:
        if empty:
            raise error(f"{path}: the file is empty (no keys, or only comments); {empty}")
        data = {}
    if not isinstance(data, dict):
        raise error(f"{path}: {what} must be a mapping with {expected}")
    return data

"""Sandbox launcher: set up isolation for ONE untrusted program, then exec the sandboxed interpreter.

Run by the grader as ``<python> -I -S _sandbox_launcher.py '<json config>'``; single-threaded, so it is
safe to unshare/mount/fork here (unlike a ``preexec_fn`` in a multi-threaded grader). Steps:

1. new mount, network, PID, IPC and UTS namespaces (as root directly; as a normal user inside a new user
   namespace where the kernel allows it);
2. fork: the child is PID 1 of the new PID namespace, so when it dies the kernel kills every process the
   program started (fork bombs and daemonised children included), and it cannot see or signal the grader;
3. a fresh tmpfs root holding read-only binds of /usr, /bin, /lib*, /sbin, /etc (+ configured paths),
   /dev/{null,zero,random,urandom}, a private /tmp and the program's own directory at /sandbox; chroot;
4. resource limits; drop supplementary groups, gid and uid to the unprivileged ids (root only);
5. write one ``ISOLATION {...}`` line (what was achieved) on the result fd and exec the interpreter.

A failure of a step listed in ``require`` exits with status 97 and a message on stderr; nothing runs.
"""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SETUP_FAILED = 97

libc = ctypes.CDLL(None, use_errno=True)


def fail(msg):
    os.write(2, ("sandbox setup failed: " + msg + "\n").encode())
    os._exit(SETUP_FAILED)


def call(ret, what):
    if ret != 0:
        raise OSError(ctypes.get_errno(), what + ": " + os.strerror(ctypes.get_errno()))


def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    call(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), "mount " + str(dst))


def write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def bind_ro(src, dst):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    try:
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:  # in a user namespace locked flags may refuse the remount; keep nosuid at least
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def build_root(cfg, got):
    root = cfg["root_mount"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=%dm,mode=755" % cfg["tmpfs_mb"])
    for path in cfg["ro_paths"]:
        if not os.path.lexists(path):
            continue
        dst = root + path
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(path) and os.path.dirname(path) == "/":  # merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(path), dst)
        else:
            bind_ro(path, dst)
    os.makedirs(root + "/dev", exist_ok=True)
    for dev in ("null", "zero", "random", "urandom"):
        open(root + "/dev/" + dev, "a").close()
        mount("/dev/" + dev, root + "/dev/" + dev, None, MS_BIND)
    os.makedirs(root + "/tmp", exist_ok=True)
    os.chmod(root + "/tmp", 0o1777)
    os.makedirs(root + "/sandbox", exist_ok=True)
    mount(cfg["workdir"], root + "/sandbox", None, MS_BIND)
    try:
        os.makedirs(root + "/proc", exist_ok=True)
        mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        got["proc"] = "private"
    except OSError:
        pass
    os.chroot(root)
    os.chdir("/sandbox")
    got["filesystem"] = "chroot"


def set_limits(lim):
    R = resource
    pairs = [
        (R.RLIMIT_AS, lim["memory_mb"] << 20),
        (R.RLIMIT_FSIZE, lim["fsize_mb"] << 20),
        (R.RLIMIT_NOFILE, lim["nofile"]),
        (R.RLIMIT_CORE, 0),
    ]
    for what, v in pairs:
        R.setrlimit(what, (v, v))
    R.setrlimit(R.RLIMIT_CPU, (lim["cpu_s"], lim["cpu_s"] + 1))


def main():
    cfg = json.loads(sys.argv[1])
    require = set(cfg["require"])
    got = {"user": "unchanged", "network": "shared", "pid": "shared", "filesystem": "shared", "proc": "none"}
    is_root = os.geteuid() == 0
    os.dup2(cfg["result_fd"], 3)
    if cfg["result_fd"] != 3:
        os.close(cfg["result_fd"])
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    try:
        if not is_root:
            uid, gid = os.getuid(), os.getgid()
            call(libc.unshare(CLONE_NEWUSER | flags), "unshare(user+ns)")
            write_file("/proc/self/setgroups", "deny")
            write_file("/proc/self/uid_map", "0 %d 1" % uid)
            write_file("/proc/self/gid_map", "0 %d 1" % gid)
            got["user"] = "user-namespace"
        else:
            call(libc.unshare(flags), "unshare")
        got["network"] = got["pid"] = "private"
    except OSError as e:
        if require & {"network", "pid", "filesystem"}:
            fail(str(e))
    if got["pid"] == "private":
        pid = os.fork()
        if pid:  # stay as a reaper outside the namespace: relay the exit status
            os.close(3)
            _, status = os.waitpid(pid, 0)
            if os.WIFSIGNALED(status):
                os._exit(128 + os.WTERMSIG(status))
            os._exit(os.WEXITSTATUS(status))
    try:
        if got["network"] == "private":
            build_root(cfg, got)
    except OSError as e:
        if "filesystem" in require:
            fail(str(e))
    if got["filesystem"] != "chroot":
        os.chdir(cfg["workdir"])
    try:
        set_limits(cfg["limits"])
        if is_root and cfg["uid"] is not None:
            os.setgroups([])
            os.setgid(cfg["gid"])
            os.setuid(cfg["uid"])
            got["user"] = "uid %d" % cfg["uid"]
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["limits"]["nproc"], cfg["limits"]["nproc"]))
    except OSError as e:
        fail("limits/uid: " + str(e))
    if "user" in require and got["user"] == "unchanged":
        fail("could not drop privileges")
    os.write(3, ("ISOLATION " + json.dumps(got) + "\n").encode())
    argv = cfg["argv"]
    try:
        os.execve(argv[0], argv, cfg["env"])
    except OSError as e:
        fail("exec %s: %s" % (argv[0], e))


if __name__ == "__main__":
    main()

"""The step server: one process per SCons run that imports nnbuild (numpy, jsonschema, the CLI)
once and forks a child for each step, so a build of N steps pays the interpreter start and the
imports once instead of N times.

Each child is a process of its own, as `python -m nnbuild STEP` was: it takes the action's
environment (os.environ), its working directory, the server's stdin, stdout and stderr (those of
the SCons run), runs nnbuild.cli.main on the step's argument list and exits with its status; the
server reports that status (128+N for a signal, as run_argv) on the request's connection. The
server leaves when SCons closes the lifeline pipe (SCons' exit, or its death), and removes its
socket folder.

Protocol, one connection per step: the client sends a JSON object {argv, env, cwd} and shuts its
writing side; the server answers the exit status as decimal text and closes.

`python .../stepserver.py SOCKET LIFELINE_FD` starts one (StepServer below does), run as a file so
the server imports neither SCons nor the tool; its first import path is the working directory, as
`python -m nnbuild`'s.
"""

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading

#: what every step imports: the server imports it once, its children inherit it
PRELOAD = ("nnbuild.cli", "numpy", "jsonschema", "nnbuild.boards", "nnbuild.kinds", "nnbuild.steps")
#: packages whose modules the server may import ahead for a step that imported them before
#: (pure computation, no threads started at import: safe to fork after)
PRELOAD_PACKAGES = frozenset({"nnbuild", "numpy", "scipy", "jsonschema", "jsonschema_specifications", "referencing",
                              "rpds", "attrs", "jinja2", "markupsafe", "elftools", "capstone"})
#: variables read when an interpreter starts: steps whose environment differs get a server of their own
STARTUP_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUTF8",
                     "PYTHONIOENCODING", "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE",
                     "PYTHONDEVMODE", "PYTHONINTMAXSTRDIGITS", "LANG", "LC_ALL", "LC_CTYPE")


# --------------------------------------------------------------------------- the server process


def serve(path, lifeline):
    """Answer steps until the lifeline closes; then remove the socket's folder."""
    try:
        _serve(path, lifeline)
    finally:
        import shutil
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _preload(names):
    """Import what the next steps need, once for all of them (on the first request: a build that
    runs no step pays nothing)."""
    for name in names:
        _try_import(name)
    import gc
    gc.freeze()   # what the server imported stays shared with its children (no copy on write by the collector)


def _serve(path, lifeline):
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the children; the server leaves with SCons
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    waiting = {}       # child pid -> (connection, step, modules file)
    learned = {}       # step -> modules a run of it imported beyond the server's
    preloaded = set()  # None once PRELOAD is imported, then each step whose learned modules are
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(lifeline, selectors.EVENT_READ, "lifeline")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    private = (listener.fileno(), lifeline, wake_r, wake_w)
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "lifeline":
                    return
                if key.data == "child":
                    _drain(wake_r)
                    _reap(waiting, learned)
                    continue
                connection, _ = listener.accept()
                request = json.loads(_read_all(connection))
                step = request["argv"][0] if request["argv"] else ""
                if not preloaded:
                    _preload(PRELOAD)
                    preloaded.add(None)
                if step in learned and step not in preloaded:   # a second run of the step: its imports once here
                    _preload(learned[step])
                    preloaded.add(step)
                pid = os.fork()
                if pid == 0:
                    others = tuple(c.fileno() for c, _, _ in waiting.values())
                    _child(request, connection, private + others, f"{path}.{os.getpid()}.modules")
                waiting[pid] = (connection, step, f"{path}.{pid}.modules")
    finally:
        for connection, _, _ in waiting.values():
            connection.close()


def _child(request, connection, private, modules_file):
    """The step, in the forked child: the action's environment and folder, the CLI's exit status."""
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for number in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM"):   # a forked SCons' own
            if hasattr(signal, number):
                signal.signal(getattr(signal, number), signal.SIG_DFL)
        connection.close()
        for fd in private:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        before = set(sys.modules)
        sys.argv = ["nnbuild", *request["argv"]]
        status = _run(request["argv"])
        try:
            with open(modules_file, "w") as out:
                out.write("\n".join(sorted(set(sys.modules) - before)))
        except OSError:
            pass
    except BaseException:   # the step's folder is gone, ...: said, and status 1
        import traceback
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:   # a closed pipe: the status still goes back
                pass
        os._exit(status)


def _run(argv):
    """nnbuild.cli.main as `python -m nnbuild` runs it: SystemExit's code, a traceback and 1 for any
    other exception (the interpreter's own rule)."""
    try:
        from nnbuild.cli import main
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    except KeyboardInterrupt:
        import traceback
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:
        import traceback
        traceback.print_exc()
        return 1
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _reap(waiting, learned):
    while waiting:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid not in waiting:
            continue
        connection, step, modules_file = waiting.pop(pid)
        code = os.waitstatus_to_exitcode(wait_status)
        try:
            connection.sendall(f"{code if code >= 0 else 128 - code}\n".encode())
        except OSError:
            pass
        connection.close()
        try:
            with open(modules_file) as f:
                names = f.read().split()
            os.unlink(modules_file)
        except OSError:
            names = []
        if step not in learned:
            learned[step] = [n for n in names if n.partition(".")[0] in PRELOAD_PACKAGES]


def _try_import(name):
    try:
        __import__(name)
    except Exception:   # a module that cannot load here is imported (and fails) in the step itself
        pass


def _drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _read_all(connection):
    chunks = []
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


# --------------------------------------------------------------------------- the SCons side


class StepServer:
    """A step server of this SCons run, started on its first step. `run(argv, env, cwd)` returns the
    step's exit status like run_argv; None when no server can run here (the caller runs the step
    as its own process)."""

    def __init__(self, python, env):
        self.python, self.env = python, env
        self.folder = tempfile.mkdtemp(prefix="nnbuild-steps-")
        self.path = os.path.join(self.folder, "s")
        lifeline_r, self.lifeline = os.pipe()
        try:
            self.process = subprocess.Popen([python, os.path.abspath(__file__), self.path, str(lifeline_r)],
                                            env=env, pass_fds=(lifeline_r,))
        finally:
            os.close(lifeline_r)

    def connect(self):
        """A connection to the server, once it listens (None if it died first)."""
        import time
        delay = 0.005
        while True:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                client.connect(self.path)
                return client
            except (FileNotFoundError, ConnectionRefusedError):
                client.close()
                if self.process.poll() is not None:
                    return None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def run(self, argv, env, cwd):
        client = self.connect()
        if client is None:
            return None
        with client:
            client.sendall(json.dumps({"argv": list(argv), "env": env, "cwd": cwd}).encode())
            client.shutdown(socket.SHUT_WR)
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = client.recv(64)
                if not chunk:   # the server went away during the step (SCons is stopping)
                    return None
                answer += chunk
        return int(answer)

    def close(self):
        try:
            os.close(self.lifeline)
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        import shutil
        shutil.rmtree(self.folder, ignore_errors=True)


class _Forked:
    """The little of Popen that StepServer uses, for a server forked from this process."""

    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        import time
        end = time.monotonic() + (timeout or 0)
        while self.poll() is None:
            if timeout is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("step server", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self):
        os.kill(self.pid, signal.SIGKILL)
        self.wait()


class ForkedStepServer(StepServer):
    """A step server forked from the SCons process while it reads the SConstructs (one thread, so a
    safe fork): it starts with every module SCons already imported (nnbuild, numpy, jsonschema), no
    interpreter start and no import paid again."""

    def __init__(self):
        self.python, self.env = sys.executable, {v: os.environ.get(v) for v in STARTUP_VARIABLES}
        self.paths = {os.path.abspath(p) for p in sys.path if p}
        self.folder = tempfile.mkdtemp(prefix="nnbuild-steps-")
        self.path = os.path.join(self.folder, "s")
        lifeline_r, self.lifeline = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(self.lifeline)
                serve(self.path, lifeline_r)
            finally:
                os._exit(0)
        os.close(lifeline_r)
        self.process = _Forked(pid)

    def serves(self, python, env):
        """Whether a step of this interpreter and environment runs the same here as in a process of
        its own: the same interpreter and PYTHON* start-up variables, and every PYTHONPATH folder
        already on this process' import path (the locale variables are not compared: a step's
        stdout and stderr take SCons' encoding)."""
        if python != self.python:
            return False
        if any(env.get(v) != self.env[v] for v in STARTUP_VARIABLES if v.startswith("PYTHON") and v != "PYTHONPATH"):
            return False
        return all(os.path.abspath(p) in self.paths for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p)


_SERVERS = {}
_FORKED = []
_LOCK = threading.Lock()


def fork_server():
    """Fork this SCons run's step server now, while the process has one thread (SCons starts its job
    threads after reading the SConstructs); nothing where it cannot fork."""
    with _LOCK:
        if _FORKED or not hasattr(os, "fork") or not hasattr(socket, "AF_UNIX") or threading.active_count() != 1:
            return
        _FORKED.append(ForkedStepServer())
        if not _SERVERS:
            import atexit
            atexit.register(close_all)


def server_for(python, env):
    """The step server for this interpreter and start-up environment: the forked one where it serves
    the step, else one started for it on first use."""
    if _FORKED and _FORKED[0].serves(python, env) and _FORKED[0].process.poll() is None:
        return _FORKED[0]
    key = (python, tuple(env.get(v) for v in STARTUP_VARIABLES))
    with _LOCK:
        server = _SERVERS.get(key)
        if server is None:
            if not hasattr(os, "fork") or not hasattr(socket, "AF_UNIX"):
                return None
            if not _SERVERS and not _FORKED:
                import atexit
                atexit.register(close_all)
            server = _SERVERS[key] = StepServer(python, env)
        return server


def close_all():
    with _LOCK:
        for server in [*_FORKED, *_SERVERS.values()]:
            server.close()
        _SERVERS.clear()
        _FORKED.clear()


if __name__ == "__main__":
    if getattr(sys.flags, "safe_path", False):
        del sys.path[0]
    else:
        sys.path[0] = os.getcwd()   # as `python -m nnbuild`: the working directory first
    serve(sys.argv[1], int(sys.argv[2]))

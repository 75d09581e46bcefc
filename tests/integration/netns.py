"""Hosts that lose their network (``test_netns_partition.py``, issue 27 point 8).

Three parts:

* **Hosts**: Linux network namespaces, each joined to the root namespace by a veth pair
  of its own on private addresses the test picks (``10.231.<k>.0/24``, an octet no
  address or route of this machine uses). A namespace has no other interface and no
  default route: its processes reach the root-side veth addresses and nothing else.
  :meth:`Host.cut` sets the root-side end down: every TCP connection of that host
  stalls (nothing is reset, as when a cable is pulled); :meth:`Host.heal` brings it back.
* **Services through the veths**: a private ``redis-server`` bound to 127.0.0.1 and the
  root-side addresses (:class:`PrivateRedis`), and a TCP forwarder in the test process
  (:class:`Forwarder`) listening on the root-side addresses and piping to
  PostgreSQL on 127.0.0.1:5432. The system services are not reconfigured. When a host's
  link is cut, the forwarder's connections to it stall too, and their upstream
  PostgreSQL sessions stay open (PostgreSQL sees no partition, as it would not across
  a real network until TCP keepalive gives up).
* **The app the workers run** (``hypha worker --app tests.integration.netns:hypha``),
  built lazily from the environment so that importing this module builds nothing:
  ``netns_linear`` (three steps) and ``netns_fan`` (three leaves, a reducer, a last
  step), :class:`Recorder` agents on :class:`SlowBackend` (the Mock backend with a turn
  that takes a second or two). Every node function and every turn's stream, when it
  ends, appends ``{kind, id, host, pid, at}`` as a line to the file named by
  :data:`ENDS_ENV` (the file system is shared by the namespaces: a cut-off host's record
  is written at once): which host really ran what, and when.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from hypha_celery import Context, FanOut, Finish, Graph, Hypha, Next, NodeContext, Outcome, Settings
from hypha_celery.agents import Agent, NoReply, Response, TurnError
from hypha_celery.backends import BackendEvent, MockBackend
from hypha_celery.backends.base import Checkpoint, Session

# -- hosts: network namespaces joined by veth pairs --------------------------------------
#: The /16 the test's veth addresses come from (one free /24 per test session).
NET = "10.231"
IP_TIMEOUT = 15.0


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip ARGS``; a failure raises with ip's own message when ``check``."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def probe() -> str | None:
    """None when this process can create a network namespace (tried once: added and
    deleted), else why not."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    name = f"hyprobe{uuid.uuid4().hex[:8]}"
    try:
        done = ip("netns", "add", name, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns add failed: {exc}"
    if done.returncode != 0:
        return f"ip netns add failed: {done.stderr.strip() or done.returncode}"
    ip("netns", "del", name, check=False)
    return None


@dataclass(frozen=True)
class Host:
    """A network namespace and its veth pair: ``root_addr`` is the root side (where the
    services listen for this host), ``ns_addr`` the host's own address."""

    label: str
    netns: str
    root_if: str
    ns_if: str
    root_addr: str
    ns_addr: str

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def cut(self) -> None:
        """The root side of the link goes down: the host's packets go nowhere."""
        ip("link", "set", self.root_if, "down")

    def heal(self) -> None:
        ip("link", "set", self.root_if, "up")

    def carrier(self) -> bool:
        """Whether the host's own end of the link has a carrier again."""
        done = ip("netns", "exec", self.netns, "cat", f"/sys/class/net/{self.ns_if}/carrier",
                  check=False)
        return done.stdout.strip() == "1"


def _used_octets() -> set[int]:
    """Third octets of ``NET`` that an address or a route of this machine uses."""
    text = ip("-4", "-o", "addr").stdout + ip("-4", "route").stdout
    used: set[int] = set()
    for word in text.replace("/", " ").split():
        try:
            addr = ipaddress.IPv4Address(word)
        except ValueError:
            continue
        if str(addr).startswith(f"{NET}."):
            used.add(int(str(addr).split(".")[2]))
    return used


def _host_addrs(octet: int, index: int) -> tuple[str, str]:
    """The /30 of host ``index`` in ``NET.<octet>.0/24``: root side, host side."""
    base = 4 * index
    return f"{NET}.{octet}.{base + 1}", f"{NET}.{octet}.{base + 2}"



@contextlib.contextmanager
def hosts(labels: Sequence[str]) -> Iterator[dict[str, Host]]:
    """A namespace and a veth pair per label, deleted at the end (even after a failure
    half-way through making them)."""
    token = uuid.uuid4().hex[:6]
    free = sorted(set(range(1, 255)) - _used_octets())
    if not free:
        raise RuntimeError(f"no free /24 in {NET}.0.0/16 for the test's veth pairs")
    octet = random.choice(free)
    made: list[Host] = []
    try:
        for i, label in enumerate(labels):
            root_addr, ns_addr = _host_addrs(octet, i)
            host = Host(label, f"hyn{token}{label}", f"hy{token}{label}0", f"hy{token}{label}1",
                        root_addr, ns_addr)
            made.append(host)
            ip("netns", "add", host.netns)
            ip("link", "add", host.root_if, "type", "veth", "peer", "name", host.ns_if,
               "netns", host.netns)
            ip("addr", "add", f"{root_addr}/30", "dev", host.root_if)
            ip("link", "set", host.root_if, "up")
            inside = ("netns", "exec", host.netns, "ip")
            ip(*inside, "addr", "add", f"{ns_addr}/30", "dev", host.ns_if)
            ip(*inside, "link", "set", host.ns_if, "up")
            ip(*inside, "link", "set", "lo", "up")
        yield {h.label: h for h in made}
    finally:
        for host in made:
            ip("link", "del", host.root_if, check=False)  # deletes its peer too
            ip("netns", "del", host.netns, check=False)


# -- services reachable through the veths ------------------------------------------------
class PrivateRedis:
    """A ``redis-server`` of the test's own (nothing on disk) on 127.0.0.1 and the given
    root-side addresses."""

    def __init__(self, binary: str, workdir: Path, addrs: Sequence[str], port: int) -> None:
        self.port = port
        self.log = workdir / "redis.log"
        self.argv = [binary, "--port", str(port), "--bind", " ".join(["127.0.0.1", *addrs]),
                     "--save", "", "--appendonly", "no", "--protected-mode", "no",
                     "--dir", str(workdir)]
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, addr: str = "127.0.0.1") -> str:
        return f"redis://{addr}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> PrivateRedis:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while True:
            client = redis.Redis(port=self.port, socket_connect_timeout=1)
            try:
                if client.ping():
                    return self
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"redis-server did not start: "
                                       f"{self.log.read_text()[-2000:]}") from None
                time.sleep(0.05)
            finally:
                client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class Forwarder:
    """TCP forwarding in the test process: each :meth:`listen` address takes
    connections and pipes each one to ``target`` (asyncio, on a thread of its own). A
    connection whose peer stalls stalls here too; nothing times out."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netns-forwarder",
                                        daemon=True)
        self._servers: list[asyncio.base_events.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread.start()

    def listen(self, addr: str) -> int:
        """Listen on ``addr`` (a free port); the port."""
        return asyncio.run_coroutine_threadsafe(self._serve(addr), self._loop).result(10)

    async def _serve(self, addr: str) -> int:
        server = await asyncio.start_server(self._accept, addr, 0)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers.difference_update((writer, up_writer))

    def close(self) -> None:
        if not self._loop.is_closed():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # every pipe sees its end and returns
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            _, stuck = await asyncio.wait(others, timeout=5)
            for task in stuck:
                task.cancel()
        for server in self._servers:
            await server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.transport.abort()  # the other direction ends with it


def release_thread_backend(app: Any) -> None:
    """Celery keeps a result backend per thread (Redis': not thread safe). A thread of the
    test process that published a chord (the sweeper re-driving a fan-out) subscribed to
    the edges' results with its own; close its connections before the thread ends, while
    Redis is up (else they are garbage-collected unclosed: a ResourceWarning)."""
    gc.collect()  # the AsyncResults it made unsubscribe when collected
    backend = app.backend
    with contextlib.suppress(Exception):
        backend.result_consumer.stop()
    with contextlib.suppress(Exception):
        backend.client.connection_pool.disconnect()


def release_app(app: Any) -> None:
    """The connections of a Celery app in this thread (its result backend) and in
    kombu's process-wide pools for its broker (publishing and control commands)."""
    release_thread_backend(app)
    for pool in (app.producer_pool, app.pool):
        with contextlib.suppress(Exception):
            pool.force_close_all()


# -- worker processes inside a namespace ---------------------------------------------------
@dataclass
class NsWorker:
    """A worker process (``hypha worker ...``) inside ``host``'s namespace, in a session
    of its own: :meth:`stop` ends its whole process group."""

    host: Host
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    cwd: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def spawn(self) -> NsWorker:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.host.argv(self.argv), cwd=self.cwd, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        pid = self.proc.pid
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # pool children, threads stuck on the network
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.proc = None


# -- the app the workers run ------------------------------------------------------------
#: Which namespace ("a", "b") a worker process runs in.
HOST_ENV = "NETNS_HOST"
#: The file (JSON lines ``{kind: node|turn, id, host, pid, at}``) a node function or a
#: turn's stream appends to when it ends (node: execution id; turn: the prompt, a token the
#: test made). One write of one short line per record (``O_APPEND``: whole lines).
ENDS_ENV = "NETNS_ENDS_FILE"
NODE_TIMEOUT = 2.0
STEPS = 3
WIDTH = 3
#: Seconds a turn's stream takes (uniform in this range, the same for the same prompt).
TURN_S = (1.0, 2.5)


def record_end(kind: str, ident: str) -> None:
    line = json.dumps({"kind": kind, "id": ident, "host": os.environ.get(HOST_ENV, "?"),
                       "pid": os.getpid(), "at": time.time()})
    with open(os.environ[ENDS_ENV], "a") as out:
        out.write(line + "\n")


def pause(seed: Any, k: Any, low: float, high: float) -> None:
    time.sleep(random.Random(f"{seed}:{k}").uniform(low, high))


def step(state: dict[str, Any], inp: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    pause(inp["seed"], inp["k"], 0.1, 0.5)
    record_end("node", ctx.execution_id)
    return {"trail": [*state.get("trail", []), f"{inp['seed']}-{inp['k']}"]}


def leaf(state: dict[str, Any], inp: dict[str, Any], ctx: NodeContext) -> dict[str, Any]:
    pause(inp["seed"], f"leaf{inp['i']}", 0.1, 0.4)
    record_end("node", ctx.execution_id)
    return {"v": inp["seed"] * 10 + inp["i"]}


def gather(state: dict[str, Any], outcomes: list[Outcome]) -> dict[str, Any]:
    return {"values": [o.value["v"] if o.ok and o.value else None for o in outcomes]}


def _seed(ctx: Context) -> Any:
    inp = ctx.input
    assert isinstance(inp, dict)
    return inp["seed"]


def linear_policy(ctx: Context) -> Next | Finish:
    if ctx.step < STEPS:
        return Next("step", {"seed": _seed(ctx), "k": ctx.step + 1})
    return Finish({"trail": ctx.state["trail"]})


def fan_policy(ctx: Context) -> Next | FanOut | Finish:
    seed = _seed(ctx)
    if ctx.last is None:
        return FanOut([Next("leaf", {"seed": seed, "i": i}) for i in range(WIDTH)],
                      reducer="gather")
    if ctx.last.node_id == "gather":
        return Next("step", {"seed": seed, "k": "tail"})
    return Finish({"values": ctx.state["values"], "trail": ctx.state["trail"]})


def expected(graph_id: str, seed: int) -> dict[str, Any]:
    if graph_id == "netns_linear":
        return {"trail": [f"{seed}-{k}" for k in range(1, STEPS + 1)]}
    return {"values": [seed * 10 + i for i in range(WIDTH)], "trail": [f"{seed}-tail"]}


class Recorder(Agent):
    """Keeps ``[ref, "ok" | "error", text | reason]`` for every turn it is told of, in
    order: a decision applied twice would show as its ref twice."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return {}, {"outcomes": []}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], [ref, "ok", response.text]]})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({"outcomes": [*state["outcomes"], [ref, "error", error.reason]]})


class SlowBackend(MockBackend):
    """The Mock backend, every turn the same script: wait a second or two (the model
    thinking), record the end, answer ``done <prompt>``."""

    def prompt(self, session: Session, prompt: str,
               checkpoint: Checkpoint | None = None) -> tuple[Iterator[BackendEvent], Session]:
        return _slow_turn(prompt), session


def _slow_turn(prompt: str) -> Iterator[BackendEvent]:
    time.sleep(random.Random(prompt).uniform(*TURN_S))
    record_end("turn", prompt)
    yield BackendEvent.new("result", {"text": f"done {prompt}"})


def build(settings: Settings) -> Hypha:
    hypha = Hypha(settings)
    hypha.register(Graph(id="netns_linear", nodes={"step": step}, decision_policy=linear_policy,
                         max_steps=10, execution_timeout=300.0, node_timeout=NODE_TIMEOUT))
    hypha.register(Graph(id="netns_fan", nodes={"leaf": leaf, "step": step},
                         reducers={"gather": gather}, decision_policy=fan_policy,
                         max_steps=10, execution_timeout=300.0, node_timeout=NODE_TIMEOUT))
    return hypha


_app: Hypha | None = None


def __getattr__(name: str) -> Any:
    """``hypha`` / ``celery``: the workers' app, built from the environment on first use."""
    global _app
    if name not in ("hypha", "celery"):
        raise AttributeError(name)
    if _app is None:
        _app = build(Settings.from_env())
    return _app if name == "hypha" else _app.celery

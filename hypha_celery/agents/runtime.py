"""What agent tasks and the client share: the Celery app, the store, the delivery
transport, the wake-up notifier, the middleware (turn hooks; the telemetry by default),
and the registry of agent and backend classes."""

from __future__ import annotations

import importlib
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from celery import Celery

from hypha_celery.agents.behaviour import Agent
from hypha_celery.agents.channels import Transport
from hypha_celery.agents.telemetry import default_stack
from hypha_celery.agents.tools import AgentTools, Emit
from hypha_celery.agents.watch import Watch
from hypha_celery.backends import Backend
from hypha_celery.backends.llm.client import BackendServices
from hypha_celery.errors import AgentSpecError
from hypha_celery.live import LiveBus, NullBus
from hypha_celery.memory import MemoryManager
from hypha_celery.middleware import MiddlewareStack
from hypha_celery.runtime import canvas
from hypha_celery.store import EventStore

if TYPE_CHECKING:
    from hypha_celery.runtime.notifier import Notifier


T = TypeVar("T")


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def new_token() -> str:
    return uuid.uuid4().hex


def ref_channel(ref: str) -> str:
    """The notifier key an asker waits on."""
    return f"agent-ref:{ref}"


@dataclass
class AgentRuntime:
    app: Celery
    store: EventStore
    transport: Transport
    notifier: Notifier
    lease_interval: float = 1.0
    kinds: dict[str, type[Agent]] = field(default_factory=dict)
    backends: dict[str, type[Backend]] = field(default_factory=dict)
    #: Called at every turn's start and end, rejection and cancellation.
    middleware: MiddlewareStack = field(default_factory=default_stack)
    #: Live token streams of turns (topic ``agent:<name>``); never stored.
    live: LiveBus = field(default_factory=NullBus)
    #: What every backend instance is bound to (``Backend.bind``): the model keys' shared
    #: rate limiter, so agent turns and graph nodes draw on one budget per key.
    services: BackendServices = field(default_factory=BackendServices)
    #: Governed tools the turns of this process run themselves (``Agents.use_tools``);
    #: None: tool calls end a turn, for the application to answer.
    tools: AgentTools | None = None
    #: Governed memory on ``store``, read by the turns of agents whose context reads
    #: memory (built at first use).
    memory: MemoryManager | None = None
    #: Beats the owned agents' heartbeats and stops interrupted turns (one thread per
    #: process, see :mod:`.watch`).
    watch: Watch = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.watch = Watch(self.store, self.lease_interval)

    def memory_manager(self) -> MemoryManager:
        if self.memory is None:
            self.memory = MemoryManager(self.store)
        return self.memory

    def publish(self, name: str, incarnation: str, token: str) -> None:
        canvas.agent_pump(self.app, name, incarnation, token)

    def register(self, agent: type[Agent], backend: type[Backend]) -> tuple[str, str]:
        if not (isinstance(agent, type) and issubclass(agent, Agent)):
            raise AgentSpecError(f"an agent is a subclass of Agent, got {agent!r}")
        if not (isinstance(backend, type) and issubclass(backend, Backend)):
            raise AgentSpecError(f"a backend is a subclass of Backend, got {backend!r}")
        kind, path = class_path(agent), class_path(backend)
        self.kinds[kind] = agent
        self.backends[path] = backend
        return kind, path

    def agent_class(self, kind: str) -> type[Agent]:
        return _resolve(self.kinds, kind, Agent)

    def backend_class(self, path: str) -> type[Backend]:
        return _resolve(self.backends, path, Backend)

    def new_backend(self, path: str, emit: Emit | None = None) -> Backend:
        """The one place an agent's backend instance is built: at its start, for a turn,
        a reset and its cleanup (``path``: the registered ``module:Qualname``). A turn's
        (``emit``: where its tool events go) is bound with the governed tools."""
        backend = self.backend_class(path)()
        services = self.services
        if emit is not None and self.tools is not None:
            services = replace(services, tools=self.tools.runner(emit))
        backend.bind(services)
        return backend


def _resolve(known: dict[str, type[T]], path: str, base: type) -> type[T]:
    """A registered class, or ``module:Qualname`` imported (a worker that did not run
    ``start``); only subclasses of ``base`` are accepted."""
    if path in known:
        return known[path]
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise AgentSpecError(f"{path} is not a {base.__name__} subclass")
    found = known[path] = cast("type[T]", obj)
    return found

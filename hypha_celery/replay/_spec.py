"""What a replay fixture captures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

SnapshotPolicy = Literal["none", "state_path", "full"]


class ReplaySpec(BaseModel):
    """Which event families a :class:`~hypha_celery.replay.ReplayFixture` keeps.

    Every field has an explicit default, so ``ReplaySpec()`` and ``ReplaySpec(
    capture_tool_io=False)`` mean exactly what they say (hypha drops a family whose flag is
    merely omitted; here only ``False`` drops it):

    ============================ ======== ==================================================
    field                        default  when ``False``
    ============================ ======== ==================================================
    ``capture_model_io``         ``True`` ``model.call.*`` events are dropped
    ``capture_tool_io``          ``True`` ``tool.call.*`` events are dropped
    ``capture_memory_read_set``  ``True`` ``memory.read.*`` events are dropped
    ``capture_policy_decisions`` ``True`` every type containing ``policy`` is dropped
                                          (``decision.policy.recorded``,
                                          ``tool.policy.checked``)
    ============================ ======== ==================================================

    ``snapshot_policy`` (default ``"state_path"``): ``"none"`` records no state path,
    ``"state_path"`` the node ids scheduled in order (fan-out edges included), ``"full"``
    that plus the run state after every node / reducer outcome that changed it
    (``ReplayFixture.snapshots``). A dropped family is gone from the fixture's events and
    its signature list; :func:`~hypha_celery.replay.compare` applies the fixture's spec to
    the events it compares, so both sides always see the same families.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    capture_model_io: bool = True
    capture_tool_io: bool = True
    capture_memory_read_set: bool = True
    capture_policy_decisions: bool = True
    snapshot_policy: SnapshotPolicy = "state_path"

    def keeps(self, type_: str) -> bool:
        """Whether an event of ``type_`` belongs in a fixture captured with this spec."""
        if type_.startswith("model.call."):
            return self.capture_model_io
        if type_.startswith("tool.call."):
            return self.capture_tool_io
        if type_.startswith("memory.read."):
            return self.capture_memory_read_set
        if "policy" in type_:
            return self.capture_policy_decisions
        return True

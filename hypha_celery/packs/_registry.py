"""``PackRegistry``: packs by ``id@version``, and the latest version of each id."""

from __future__ import annotations

import re
from collections.abc import Iterator

from hypha_celery.errors import PackError
from hypha_celery.packs._model import DomainPack

__all__ = ["PackRegistry", "version_key"]

_PART = re.compile(r"\d+|[^\d.\-+_]+")


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Orders versions part by part, numbers as numbers (``1.10.0`` > ``1.9.2`` >
    ``1.9``), words by text and below numbers. Pre-release tags are not special:
    ``1.0-rc1`` > ``1.0``."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in _PART.findall(version))


class PackRegistry:
    """``add`` a pack; ``get("id@version")`` or ``get("id")`` (its latest version)."""

    def __init__(self) -> None:
        self._packs: dict[str, DomainPack] = {}
        self._latest: dict[str, DomainPack] = {}

    def add(self, pack: DomainPack) -> DomainPack:
        """Register ``pack``; adding the same pack again is a no-op, a different pack
        under a taken ``id@version`` is a :class:`PackError`."""
        known = self._packs.get(pack.ref)
        if known is not None:
            if known != pack:
                raise PackError([("", f"a different pack {pack.ref} is already registered "
                                      "(change its version)")])
            return known
        self._packs[pack.ref] = pack
        latest = self._latest.get(pack.id)
        if latest is None or version_key(pack.version) > version_key(latest.version):
            self._latest[pack.id] = pack
        return pack

    def get(self, ref: str) -> DomainPack:
        """``id@version``, or ``id`` for its latest version; ``KeyError`` naming what is
        registered otherwise."""
        pack = self._packs.get(ref) if "@" in ref else self._latest.get(ref)
        if pack is None:
            known = ", ".join(sorted(self._packs)) or "none"
            raise KeyError(f"no pack {ref!r} is registered (known: {known})")
        return pack

    def latest(self, pack_id: str) -> DomainPack:
        return self.get(pack_id.partition("@")[0])

    def versions(self, pack_id: str) -> list[str]:
        """The registered versions of ``pack_id``, oldest first."""
        return sorted((p.version for p in self._packs.values() if p.id == pack_id),
                      key=version_key)

    def __contains__(self, ref: object) -> bool:
        return isinstance(ref, str) and (ref in self._packs or ref in self._latest)

    def __iter__(self) -> Iterator[DomainPack]:
        return iter(list(self._packs.values()))

    def __len__(self) -> int:
        return len(self._packs)

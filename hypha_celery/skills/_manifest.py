"""``SKILL.md``: YAML front matter between ``---`` lines (``yaml.safe_load``), then the
markdown instructions. Read into a :class:`Manifest` (the skill's fields plus the paths
its loader resolves); every problem is a :class:`~hypha_celery.errors.SkillError` naming
the file and the field.

Keys are read in our snake_case, hypha's camelCase (``trustLevel``,
``activationPolicy``, ``allowedTools``) or Claude Code's kebab-case (``allowed-tools``);
a key this module does not read is kept in ``metadata`` (forward compatible).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import yaml

from hypha_celery.errors import SkillError
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.skills._limits import SkillLimits
from hypha_celery.skills._model import Activation, ActivationMode, SideEffectPolicy, TrustLevel

__all__ = ["ID_PATTERN", "KNOWN_KEYS", "Manifest", "parse_manifest", "split_front_matter"]

#: A skill id: letters, digits, ``. _ - :``, up to 128, starting with a letter or digit.
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")

#: Front-matter keys read (after spelling normalisation) -> the field they fill.
_ALIASES = {"trust_level": "trust", "activation_policy": "activation"}
KNOWN_KEYS = frozenset({
    "name", "description", "version", "id", "activation", "trust", "priority", "enabled",
    "disabled", "allowed_tools", "required_tools", "side_effect_policy", "context_budget",
    "on_activation", "references", "scripts", "assets", "instructions"})

_T = TypeVar("_T")


@dataclass(frozen=True)
class Manifest:
    """What ``SKILL.md`` says, before its files are read: ``on_activation`` paths, and
    the declared ``scripts`` / ``assets`` paths (``None``: not declared, so the loader
    lists the ``scripts/`` and ``assets/`` folders)."""

    id: str
    name: str
    description: str
    instructions: str
    version: str | None = None
    activation: Activation = Activation()
    trust: TrustLevel = TrustLevel.REVIEWED
    priority: int = 0
    enabled: bool = True
    allowed_tools: tuple[str, ...] | None = None
    required_tools: tuple[str, ...] = ()
    side_effect_policy: SideEffectPolicy = SideEffectPolicy.INHERIT
    context_budget: int | None = None
    on_activation: tuple[str, ...] = ()
    scripts: tuple[str, ...] | None = None
    assets: tuple[str, ...] | None = None
    metadata: JsonObject = field(default_factory=dict)


def split_front_matter(text: str, path: str) -> tuple[str, str]:
    """The front matter's YAML text and the body after it."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        raise SkillError("no front matter: SKILL.md starts with a '---' line, then YAML "
                         "(name, description), then '---'", path=path)
    for i, line in enumerate(lines[1:], start=1):
        if line.rstrip() in ("---", "..."):
            return "".join(lines[1:i]), "".join(lines[i + 1:])
    raise SkillError("the front matter has no closing '---' line", path=path)


def parse_manifest(raw: bytes, *, path: str, limits: SkillLimits) -> Manifest:
    """``SKILL.md``'s bytes as a :class:`Manifest`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillError("not UTF-8 text", path=path) from None
    head, body = split_front_matter(text, path)
    doc = _load_yaml(head, path, limits)
    return _Reader(doc, path).manifest(body)


def _load_yaml(head: str, path: str, limits: SkillLimits) -> dict[str, JsonValue]:
    try:
        doc = yaml.safe_load(head)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 2}, column {mark.column + 1})" if mark else ""
        raise SkillError(f"not valid YAML: {exc.problem or 'cannot parse'}{where}",
                         path=path) from None
    except RecursionError:
        raise SkillError("not valid YAML: nested too deeply", path=path) from None
    except Exception as exc:  # the YAML library on untrusted text: any error is the file's
        raise SkillError(f"not valid YAML: {type(exc).__name__}", path=path) from None
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {type(doc).__name__}"
        raise SkillError(f"the front matter is {what}, not a mapping with name and "
                         "description", path=path)
    json = _Json(path, limits)
    out: dict[str, JsonValue] = {}
    for key, value in doc.items():
        name = _ALIASES.get(_normal(key), _normal(key))
        name = name if name in KNOWN_KEYS else str(key)  # metadata keeps its spelling
        if name in out:
            raise SkillError("given twice (in two spellings)", path=path, field=str(key))
        out[name] = json.value(value, str(key), 1)
    return out


def _normal(key: object) -> str:
    """``allowedTools`` / ``allowed-tools`` / ``allowed_tools`` -> ``allowed_tools``."""
    text = str(key)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text).replace("-", "_").lower()


class _Json:
    """YAML values as JSON, bounded (values counted as read: an alias each time)."""

    def __init__(self, path: str, limits: SkillLimits) -> None:
        self.path, self.limits, self.count = path, limits, 0

    def value(self, value: object, at: str, depth: int) -> JsonValue:
        self.count += 1
        if self.count > self.limits.max_front_matter_values:
            raise SkillError(f"the front matter holds more than "
                             f"{self.limits.max_front_matter_values} values", path=self.path)
        if depth > self.limits.max_front_matter_depth:
            raise SkillError(f"nested deeper than {self.limits.max_front_matter_depth} "
                             "levels", path=self.path, field=at)
        if isinstance(value, dict):
            return {str(k): self.value(v, f"{at}.{k}", depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, f"{at}[{i}]", depth + 1) for i, v in enumerate(value)]
        if isinstance(value, float) and not math.isfinite(value):
            raise SkillError(f"{value} is not a JSON number", path=self.path, field=at)
        if isinstance(value, datetime.date | datetime.datetime):
            return value.isoformat()
        if value is None or isinstance(value, str | int | float | bool):
            return value
        raise SkillError(f"a {type(value).__name__} is not JSON (quote it)", path=self.path,
                         field=at)


class _Reader:
    """Typed reads of the known keys; the rest is metadata."""

    def __init__(self, doc: dict[str, JsonValue], path: str, prefix: str = "") -> None:
        self.doc, self.path, self.prefix = doc, path, prefix

    def fail(self, key: str, message: str) -> SkillError:
        return SkillError(message, path=self.path, field=self.prefix + key)

    def get(self, key: str, kind: type[_T], what: str, default: _T) -> _T:
        value = self.doc.get(key)
        if value is None:
            return default
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(key, f"{what}, got {_type(value)}")
        return value

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.get(key, str, "a string", "")
        if required and not value.strip():
            raise self.fail(key, "required: a non-empty string")
        return value or None

    def strings(self, key: str, *, split: bool = False) -> tuple[str, ...] | None:
        value = self.doc.get(key)
        if value is None:
            return None
        if isinstance(value, str) and split:
            return _tool_list(value)
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"a list of strings, got {_type(value)}")
        return tuple(v for v in value if isinstance(v, str))

    def enum(self, key: str, kind: Callable[[str], _T], default: _T, known: str) -> _T:
        value = self.get(key, str, "a string", "")
        if not value:
            return default
        try:
            return kind(value)
        except ValueError:
            raise self.fail(key, f"{value!r} is not one of {known}") from None

    def manifest(self, body: str) -> Manifest:
        name = self.text("name", required=True) or ""
        skill_id = self.text("id") or name
        if not ID_PATTERN.match(skill_id):
            key = "id" if "id" in self.doc else "name"
            raise self.fail(key, f"{skill_id!r} is not a skill id (letters, digits, . _ - :, "
                                 "up to 128): give an id")
        version = self.doc.get("version")
        if version is not None and not isinstance(version, str):
            raise self.fail("version", f"a string, got {_type(version)} (quote it: "
                                       "YAML reads 1.10 as the number 1.1)")
        budget = self.get("context_budget", int, "an integer", 0)
        if budget < 0 or ("context_budget" in self.doc and budget == 0):
            raise self.fail("context_budget", "a positive integer (characters)")
        on_activation, declared_assets = self._references()
        assets = self._files("assets")
        if declared_assets:
            assets = (*(assets or ()), *declared_assets)
        return Manifest(
            id=skill_id, name=name,
            description=self.text("description", required=True) or "",
            instructions=(self.text("instructions") or body).strip(),
            version=version or None,
            activation=self._activation(),
            trust=self.enum("trust", TrustLevel, TrustLevel.REVIEWED,
                            "trusted, reviewed, untrusted"),
            priority=self.get("priority", int, "an integer", 0),
            enabled=self._enabled(),
            allowed_tools=self.strings("allowed_tools", split=True),
            required_tools=self.strings("required_tools", split=True) or (),
            side_effect_policy=self.enum(
                "side_effect_policy", SideEffectPolicy, SideEffectPolicy.INHERIT,
                ", ".join(SideEffectPolicy)),
            context_budget=budget or None,
            on_activation=(*(self.strings("on_activation") or ()), *on_activation),
            scripts=self._files("scripts"),
            assets=assets,
            metadata={k: v for k, v in self.doc.items() if k not in KNOWN_KEYS})

    def _enabled(self) -> bool:
        enabled = self.get("enabled", bool, "true or false", True)
        disabled = self.get("disabled", bool, "true or false", False)
        return enabled and not disabled

    def _activation(self) -> Activation:
        value = self.doc.get("activation")
        if value is None:
            return Activation()
        if isinstance(value, str):
            value = {"mode": value}
        if not isinstance(value, dict):
            raise self.fail("activation", f"a mode (always, keyword, regex, intent, manual) "
                                          f"or a mapping with mode, got {_type(value)}")
        sub = _Reader(value, self.path, "activation.")
        mode = sub.enum("mode", ActivationMode, ActivationMode.ALWAYS,
                        "always, keyword, regex, intent, manual")
        patterns: list[str] = []
        for key, only in (("patterns", None), ("keywords", ActivationMode.KEYWORD),
                          ("regex", ActivationMode.REGEX), ("intents", ActivationMode.INTENT)):
            found = sub.strings(key)
            if found is not None and only is not None and only is not mode:
                raise self.fail(f"activation.{key}", f"belongs to mode {only}, not {mode}")
            patterns += found or ()
        unknown = sorted(set(value) - {"mode", "patterns", "keywords", "regex", "intents"})
        if unknown:
            raise self.fail(f"activation.{unknown[0]}", "unknown: mode, patterns, keywords, "
                                                         "regex, intents")
        needs = mode in (ActivationMode.KEYWORD, ActivationMode.REGEX, ActivationMode.INTENT)
        if needs and not patterns:
            raise self.fail("activation", f"mode {mode} needs patterns (or {mode}s) to match")
        return Activation(mode=mode, patterns=tuple(patterns))

    def _entries(self, key: str) -> list[tuple[str, str | None, str | None]]:
        """A list of paths or hypha's ``{path, type, loadPolicy}`` entries."""
        value = self.doc.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(key, f"a list of paths, got {_type(value)}")
        out: list[tuple[str, str | None, str | None]] = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                out.append((item, None, None))
                continue
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                raise self.fail(f"{key}[{i}]", "a path, or a mapping with path")
            sub = _Reader({_normal(k): v for k, v in item.items()}, self.path, f"{key}[{i}].")
            kind = sub.get("type", str, "a string", "") or None
            policy = sub.get("load_policy", str, "a string", "") or None
            out.append((str(item["path"]), kind, policy))
        return out

    def _references(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """hypha's ``references``: a path, or an entry whose ``loadPolicy`` is
        ``on_activation`` (the default of a path), loads; the others are listed."""
        load: list[str] = []
        listed: list[str] = []
        for path, _kind, policy in self._entries("references"):
            (load if policy in (None, "on_activation") else listed).append(path)
        return tuple(load), tuple(listed)

    def _files(self, key: str) -> tuple[str, ...] | None:
        if self.doc.get(key) is None:
            return None
        return tuple(path for path, _kind, _policy in self._entries(key))


def _tool_list(text: str) -> tuple[str, ...]:
    """Claude Code's ``allowed-tools: Read, Grep`` (commas) or ``Bash(git:*) Read``
    (spaces outside parentheses)."""
    if "," in text:
        parts = text.split(",")
    else:
        parts, depth, current = [], 0, ""
        for char in text:
            depth += (char == "(") - (char == ")")
            if char.isspace() and depth <= 0:
                parts.append(current)
                current = ""
            else:
                current += char
        parts.append(current)
    return tuple(p.strip() for p in parts if p.strip())


def _type(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)

"""``hypha skill validate DIR``: check skills (``SKILL.md`` packages) from the command
line. DIR is one skill directory or a directory of them. Each skill that loads is one
line (``ok  ID  VERSION  TRUST  ACTIVATION``); each problem is one line naming the file
and field (a regex pattern that can never match is one too), and the command exits 1."""

from __future__ import annotations

import click

from hypha_celery.errors import SkillError
from hypha_celery.skills import ActivationMode, Skill, regex_problem, scan_skills

__all__ = ["COMMANDS", "skill_lines"]


def skill_lines(directory: str) -> tuple[list[str], list[str]]:
    """The ``ok`` lines and the problem lines of the skills in ``directory``."""
    scan = scan_skills(directory)
    problems = [str(e) for e in scan.errors]
    oks = []
    for skill in scan.skills:
        found = _patterns(skill)
        problems += found
        if not found:
            oks.append(f"ok  {skill.id}  {skill.version or '-'}  {skill.trust}  "
                       f"{skill.activation.mode}")
    if not scan.skills and not scan.errors:
        problems.append(f"{directory}: no SKILL.md here nor in its subdirectories")
    return oks, problems


def _patterns(skill: Skill) -> list[str]:
    if skill.activation.mode is not ActivationMode.REGEX:
        return []
    where = f"{skill.source}/SKILL.md" if skill.source else skill.id
    out = []
    for i, pattern in enumerate(skill.activation.patterns):
        problem = regex_problem(pattern)
        if problem:
            out.append(str(SkillError(f"never matches: {problem}", path=where,
                                      field=f"activation.patterns[{i}]")))
    return out


@click.group("skill")
def skill_group() -> None:
    """Skills: SKILL.md packages (YAML front matter, markdown instructions) bound to
    agents and workflow states (docs/skills.md)."""


@skill_group.command("validate")
@click.argument("directory", type=click.Path(file_okay=False))
def validate_cmd(directory: str) -> None:
    """Load the skill in DIRECTORY (or each */SKILL.md under it) within the loader's
    bounds; print `ok  ID  VERSION  TRUST  ACTIVATION` per skill, or every problem
    (FILE: field: message) and exit 1."""
    oks, problems = skill_lines(directory)
    for line in oks:
        click.echo(line)
    for line in problems:
        click.echo(line)
    if problems:
        click.get_current_context().exit(1)


COMMANDS: tuple[click.Command, ...] = (skill_group,)

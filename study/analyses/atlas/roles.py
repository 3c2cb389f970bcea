"""The atlas's token roles: `atlas.roles` checked against the roles a task declares
(`Task.role_names`), and the grid's role names that the setting asks for. Torch-free: the
command line checks the setting with it."""
from __future__ import annotations

from study.core.errors import UsageError


def asked_roles(asked: tuple[str, ...], task_cls) -> tuple[str, ...]:
    """`atlas.roles` checked against the task's declared roles (`role_names`): each a role
    (`rhs`) or one occurrence of it (`rhs@3`). A UsageError names the one not declared."""
    declared = tuple(getattr(task_cls, "role_names", ()))
    if not declared:
        raise UsageError(f"atlas: task {task_cls.name} declares no token roles (Task.roles); "
                         f"the atlas needs them")
    for name in asked:
        role, _, index = name.partition("@")
        if role not in declared or (index and not index.isdigit()):
            raise UsageError(f"atlas.roles: {name!r} is not a token role of {task_cls.name}; "
                             f"choose from {', '.join(declared)} (or one occurrence, "
                             f"<role>@<i>)")
    return tuple(asked)


def roles_of(asked: tuple[str, ...], names) -> list[str]:
    """The task's role names (`Task.roles`' keys, in order) that `atlas.roles` asks for:
    all where none asked, else each asked role's every occurrence or the one asked."""
    names = list(names)
    if not asked:
        return names
    return [n for n in names if n in asked or n.split("@", 1)[0] in asked]

"""How to install an extra, said the same way by every error message: until gepetto is released on PyPI, an extra
is installed from a clone of the repository, or as the packages it stands for."""

from __future__ import annotations

from importlib import metadata


def extra_requirements(extra: str) -> list[str]:
    """The requirements an extra of the installed gepetto adds (empty when gepetto's metadata is not found)."""
    try:
        requires = metadata.requires("gepetto") or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        if f'extra == "{extra}"' in marker.replace("'", '"'):
            out.append(requirement.strip())
    return out


def install_hint(extra: str) -> str:
    """`pip install -e ".[EXTRA]"` from the repository, and the extra's own packages when they are few."""
    hint = f'pip install -e ".[{extra}]" in the gepetto repository'
    packages = extra_requirements(extra)
    if packages and len(packages) <= 3:
        hint += ", or pip install " + " ".join(f'"{p}"' for p in packages)
    return hint

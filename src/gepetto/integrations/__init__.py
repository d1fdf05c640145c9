"""Optional integrations (gepa adapters, MLflow, ...): each imports its own heavy dependency lazily, and the
engine never imports any of them."""

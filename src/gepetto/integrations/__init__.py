"""Optional integrations (Ray, gepa adapters, MLflow): each an extra that imports its own heavy dependency only
when used, and the engine never imports any of them."""

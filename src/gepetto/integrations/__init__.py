"""Optional integrations (each an extra, imported only when used): `gepetto.integrations.ray`, ..."""

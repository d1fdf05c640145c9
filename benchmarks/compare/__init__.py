"""Head to head with the reference `gepa` package: one harness that runs both systems on the same work."""

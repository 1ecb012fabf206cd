"""The timeout ladder: its model, its orderings, its YAML description, Ray's defaults."""

"""Keys and values: the paged pool, the shared chat prefix and reused prompt prefixes."""

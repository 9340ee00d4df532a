"""The target's forward over a packed batch on the paged cache: attention, decoder layers, linear kernels' choice."""

"""A straight line fitted to a stream of measurements that drift: the load policy's cost curves."""

from __future__ import annotations

from collections.abc import Callable


class DecayedLine:
    """y = a + b x by least squares with exponential forgetting (no opinion until it has data)."""

    def __init__(self, decay: float):
        self.decay = decay  # weight kept per new observation
        self.s = self.sx = self.sy = self.sxx = self.sxy = 0.0

    def add(self, x: float, y: float) -> None:
        for name in ("s", "sx", "sy", "sxx", "sxy"):
            setattr(self, name, getattr(self, name) * self.decay)
        self.s += 1.0
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y

    def predict(self, x: float, prior: Callable[[float], float]) -> float | None:
        """a + b x; with too little spread in x so far, the mean scaled along the prior's shape
        (mean y * prior(x) / prior(mean x)); None before any data."""
        curve = self.curve(prior)
        return curve(x) if curve is not None else None

    def curve(self, prior: Callable[[float], float]) -> Callable[[float], float] | None:
        """`predict` as a function of x, its fit worked out once (None before any data): what the
        load policy reads at many x per step (the same floats as `predict`, which calls it)."""
        if self.s < 1e-9:
            return None
        mean_x, mean_y = self.sx / self.s, self.sy / self.s
        variance = self.sxx / self.s - mean_x * mean_x
        if self.s >= 4 and variance > 1.0:
            b = max((self.sxy / self.s - mean_x * mean_y) / variance, 0.0)
            a = max(mean_y - b * mean_x, 1e-6)
            return lambda x: a + b * x
        at_mean = prior(mean_x)
        return lambda x: mean_y * prior(x) / at_mean

"""How much each step drafts: off, a chain of k tokens or a tree, per request and by load, from measured costs."""

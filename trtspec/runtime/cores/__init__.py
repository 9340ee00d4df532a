"""The engine loop's threads: one OpenMP team, and its size while other processes take the cores."""

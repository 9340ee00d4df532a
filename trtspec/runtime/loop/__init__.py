"""The engine loop: the scheduler, one step's numbered phases, sequences, requests and their statistics."""

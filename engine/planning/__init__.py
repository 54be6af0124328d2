"""What-if planning: the real dispatcher in virtual time (the virtual loop) over an in-memory
store, the plan's inputs and results, and the traffic shapes bursts and plans share. Uses
dispatch; dispatch never uses it.
"""

__all__ = ["memory_store", "model", "planner", "simulate", "virtual_loop"]

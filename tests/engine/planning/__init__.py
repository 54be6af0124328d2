"""What-if planning: the planner, the traffic shapes, and how close a plan comes to a real run."""

"""trainingcost: what training a transformer costs, under backpropagation and backprop-free rules."""

__version__ = "0.1.0"

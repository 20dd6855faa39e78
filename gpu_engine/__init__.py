"""The real engine: a torch Llama-family engine that executes `simulator.scheduler` plans on a device.

Not built yet (its own issue). It will import torch lazily; nothing else in the project imports it.
"""

"""Adapters: every input source (config.json, Hub, safetensors, live torch/MLX modules) reduced to a ModelSpec."""

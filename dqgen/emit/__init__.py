"""Emitting: Plans rendered to CUDA through the Jinja templates (render, templates/), NVRTC (nvrtc), SASS
counts (sass). Imports core, ir, layout and solve."""

"""Emitting: the compiler's one pipeline, spec -> Artifact, memoized (pipeline); Plans rendered to CUDA through
the Jinja templates (render, templates/), NVRTC (nvrtc), SASS counts (sass). Imports core, ir, layout, check
(the pipeline proves what it renders) and solve."""

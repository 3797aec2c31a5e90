"""A torchvision-shaped fixture: a HIP extension built against the installed torch fixture."""

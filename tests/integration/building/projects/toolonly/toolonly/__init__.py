"""A torchvision-shaped fixture whose pyproject.toml has no [build-system] table."""

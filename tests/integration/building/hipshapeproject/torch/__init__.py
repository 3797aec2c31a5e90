"""The fixture package (torch 2.13/2.14 shapes in small)."""

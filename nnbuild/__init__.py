"""nnbuild: trained models as build sources for certifiable firmware."""

__version__ = "0.1.0"

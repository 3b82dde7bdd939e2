__version__ = "0.2.1.dev0"

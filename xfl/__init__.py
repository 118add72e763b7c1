"""xfl: the hardened transformer pieces behind the xfl course book.

Each module holds one idea and links back to the chapter that builds it:
``attention`` (chapters 1-3), ``position`` (chapter 4), ``runtime`` (every chapter).
"""

__version__ = "0.1.0"

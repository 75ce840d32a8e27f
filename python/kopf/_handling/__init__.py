"""The handlers: the registry the decorators fill, the lifecycles that order them, what runs
when the core calls them (the calls, sub-handlers, activities, daemons' flags, conversions), and
what each kind of handler is given as type checkers see it (``callbacks``)."""

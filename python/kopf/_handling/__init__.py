"""The handlers: the registry the decorators fill, the lifecycles that order them, and what
runs when the core calls them (the calls, sub-handlers, activities, daemons' flags, conversions,
Kubernetes Events), with the storages of their progress and the diff base."""

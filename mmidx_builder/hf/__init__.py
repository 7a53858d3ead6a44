"""The ``datasets`` layer: one builder per source kind, a front door that picks the kind,
and the registration that lets ``load_dataset`` find them (registry.py). Nothing below this
package knows about ``datasets``."""

"""``settings.watching.label_selectors``, ``field_selectors`` and ``shard_selectors``: values
keyed by resource selectors, written as the decorators name resources."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Generic, TypeVar

from kopf._structures.references import Marker, Resource, Selector

VT = TypeVar('VT')

SelectorKey = (
    str | Marker | tuple[str, str | Marker] | tuple[str, str, str | Marker] | Callable[[Resource], bool]
)


def _selector(key: SelectorKey | Selector) -> Selector:
    if isinstance(key, Selector):
        return key
    if isinstance(key, str | Marker):
        return Selector(key)
    if isinstance(key, tuple):
        return Selector(*key)
    if callable(key):
        return Selector(key)
    raise TypeError(f"Unsupported selector type: {key!r}")


class SelectorMapping(MutableMapping[SelectorKey | Selector, VT], Generic[VT]):
    """Values by resource: ``mapping['kopf.dev/kopfexamples'] = '...'``, ``mapping['pods']``,
    ``mapping['kopf.dev', 'v1', 'kopfexamples']``, ``mapping[kopf.EVERYTHING]``, or a callable
    of a resource. Iterating yields the parsed selectors."""

    def __init__(self, items: Mapping[Selector, VT] | None = None) -> None:
        super().__init__()
        self._items: dict[Selector, VT] = dict(items or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"

    def __setitem__(self, key: SelectorKey | Selector, value: VT) -> None:
        self._items[_selector(key)] = value

    def __delitem__(self, key: SelectorKey | Selector) -> None:
        del self._items[_selector(key)]

    def __getitem__(self, key: SelectorKey | Selector) -> VT:
        return self._items[_selector(key)]

    def __contains__(self, key: object) -> bool:
        return _selector(key) in self._items  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Selector]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def collect(self, resource: Resource) -> list[VT]:
        """Every value whose selector matches the resource, in the order they were set."""
        return [value for selector, value in self._items.items() if selector.check(resource)]


def server_selectors(label_selectors: SelectorMapping[str], field_selectors: SelectorMapping[str],
                     shard_selectors: SelectorMapping[str], resource: Resource) -> dict[str, str | None]:
    """What a resource's list and watch requests ask the server to filter, as Kopf joins it:
    all applicable label (field) selectors, deduplicated and sorted, by commas; the first
    applicable shard selector."""
    labels = ','.join(sorted(set(label_selectors.collect(resource))))
    fields = ','.join(sorted(set(field_selectors.collect(resource))))
    shard, *_ = shard_selectors.collect(resource) or ['']
    return {'label': labels or None, 'field': fields or None, 'shard': shard or None}

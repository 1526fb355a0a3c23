"""From a source's ``path`` to described shards: listing (``listing``), headers and indices
(``sources``, through :mod:`streamload.formats`), the data fingerprint, and the catalog cache
(``cache``) that lets a restart or another rank skip the header reads of remote sources."""

from streamload.catalog.sources import (
    SourceCatalog,
    describe_source,
    describe_sources,
    storage_handle,
)

__all__ = ["SourceCatalog", "describe_source", "describe_sources", "storage_handle"]

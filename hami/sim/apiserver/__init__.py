"""The embedded API server: store, resources, selectors, patch, authn, authz, admission, eviction, validation."""

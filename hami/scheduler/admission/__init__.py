"""Admission: HAMi's mutating webhook (webhook.py, its JSON patch patchbuild.py), who may write
placement annotations (placementguard.py), the GPU quantities the codec carries (quantitylimits.py)
and GPU pods created while the webhook was down (missed.py)."""

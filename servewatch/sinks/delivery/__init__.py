"""Delivery: verdicts posted to systems outside the process, each kind built by name from serve's config
(`registry`): Alertmanager (`alertmanager`) and a webhook (`webhook`), both over `post.Delivery` (a
background thread, bounded, retried with backoff)."""

"""Campaigns: evaluations of agents or solutions, their reports, provenance and eval frameworks."""

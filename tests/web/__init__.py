"""The browser app: server, hub, people and pages."""

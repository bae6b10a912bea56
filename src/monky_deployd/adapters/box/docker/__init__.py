"""The engine: the Engine API (read-only), what verify and the bake watch, docker compose, the
DOCKER_CONFIG, the pre-flight (disk where the engine writes). May import: core, config,
adapters' own modules, adapters.box, adapters.box.state.state.
"""

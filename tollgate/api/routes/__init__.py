"""The API's routes, one Powertools router per resource; each module's ``build_router`` makes a fresh one."""

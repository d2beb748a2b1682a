// @aleph/verification: not implemented yet (see its issue). This entry point is intentionally empty.
export {};

// @aleph/pty: not implemented yet (see its issue). This entry point is intentionally empty.
export {};

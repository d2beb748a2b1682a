// @aleph/server: not implemented yet (see its issue). Until then `start` only builds the workspace.
console.log('aleph server: not implemented yet; the workspace builds.');

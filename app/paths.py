"""Where things live: the data directory and the encryption keys (the store's URL is chosen
in ``app.session``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from engine import ConfigError, OmniPostError, SecretBox

__all__ = ["Paths", "add_key", "load_box"]

KEY_FILE = "omnipost.keys"
ENV_KEYS = "OMNIPOST_KEYS"


@dataclass(frozen=True, slots=True)
class Paths:
    data_dir: Path

    @classmethod
    def from_env(cls) -> Paths:
        """``OMNIPOST_HOME`` when set, else the user's data directory for OmniPost."""
        home = os.environ.get("OMNIPOST_HOME")
        return cls(Path(home) if home else Path(platformdirs.user_data_dir("omnipost", False)))

    @property
    def default_db_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'omnipost.db'}"

    @property
    def key_file(self) -> Path:
        return self.data_dir / KEY_FILE


def load_box(paths: Paths) -> SecretBox:
    """Keys from ``OMNIPOST_KEYS`` (comma separated, newest first), else from the key file in
    the data directory (one key a line, newest first), which is created with mode 0600 holding
    a new key when missing."""
    text = os.environ.get(ENV_KEYS)
    if text:
        return SecretBox.from_text(text, source=ENV_KEYS)
    path = paths.key_file
    if not path.exists():
        paths.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first; read theirs
        else:
            with os.fdopen(fd, "w") as f:
                f.write(SecretBox.generate_key() + "\n")
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.strerror}.") from exc
    return SecretBox.from_text(text.replace("\n", ","), source=f"the key file {path}")


def add_key(paths: Paths, key: str) -> int:
    """Put ``key`` first in the key file, above the keys it holds (so that what they wrote
    stays readable), and return how many keys it now holds. The file is replaced whole, with
    mode 0600, and created when missing. Raises ConfigError when ``OMNIPOST_KEYS`` is set (the
    key file is then not read), OmniPostError when the file cannot be written."""
    if os.environ.get(ENV_KEYS):
        raise ConfigError(
            f"{ENV_KEYS} is set, so the key file is not read; "
            f"put the new key first in {ENV_KEYS} instead."
        )
    path = paths.key_file
    fresh = path.with_name(f"{path.name}.new")
    try:
        paths.data_dir.mkdir(parents=True, exist_ok=True)
        held = path.read_text().replace(",", "\n").split() if path.exists() else []
        keys = [key, *(k for k in held if k != key)]
        fresh.unlink(missing_ok=True)  # a leftover of an interrupted run, perhaps not 0600
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(keys) + "\n")
        os.replace(fresh, path)
    except OSError as exc:
        raise OmniPostError(f"cannot write the key file {path}: {exc.strerror}.") from exc
    return len(keys)

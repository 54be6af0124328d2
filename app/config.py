"""Where things live: the data directory and the encryption keys (the store's URL is chosen
in ``app.session``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from engine import ConfigError, SecretBox

__all__ = ["Paths", "load_box"]

KEY_FILE = "omnipost.keys"


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
    the data directory, which is created with mode 0600 holding a new key when missing."""
    text = os.environ.get("OMNIPOST_KEYS")
    if text:
        return SecretBox.from_text(text)
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
        return SecretBox.from_text(path.read_text().replace("\n", ","))
    except OSError as exc:
        raise ConfigError(f"cannot read the key file {path}: {exc.strerror}.") from exc

# The tickd account, from sysusers.d/tickd.conf (or useradd where
# systemd-sysusers is missing); packaging/build puts it into the
# post-install scripts.
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/tickd.conf
elif ! getent passwd tickd >/dev/null; then
	useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin --user-group tickd
fi

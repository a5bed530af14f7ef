# The tickd account, from sysusers.d/tickd.conf (or useradd where
# systemd-sysusers is missing); packaging/build puts it into the
# post-install scripts.
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/tickd.conf
elif ! getent passwd tickd >/dev/null; then
	useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin --user-group tickd
fi
# The config may hold a Redis password: readable by root and the tickd
# group only (the service runs as tickd). The package installs it 0640
# root:root; its group becomes tickd here, once the group exists. A config
# already in another group (an operator's choice) is left as it is.
if [ -f /etc/tickd/config.toml ] && [ "$(stat -c %G /etc/tickd/config.toml)" = root ]; then
	chgrp tickd /etc/tickd/config.toml && chmod 0640 /etc/tickd/config.toml
fi

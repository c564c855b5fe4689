"""Baseline configs: layering, overrides, presets and the errors a user sees."""
import pytest

pytest.importorskip("optax")

from cube_jax.rl import config as C  # noqa: E402


def test_default_ippo_config_is_the_cpu_preset_on_easy():
    cfg = C.build("ippo")
    assert cfg["algo"] == "ippo"
    assert cfg["env"]["scenario"] == "easy"
    # The preset trains with the potential-based shaping; the environment keeps the papers' reward.
    assert cfg["shaping"]["enabled"] is True and cfg["shaping"]["reach_weight"] > 0
    assert C.DEFAULTS["shaping"]["enabled"] is False
    assert cfg["train"]["num_envs"] <= 256  # small enough for a laptop CPU


def test_shaping_can_be_switched_off_for_the_papers_reward():
    cfg = C.build("ippo", overrides=["shaping.enabled=false"])
    assert cfg["shaping"]["enabled"] is False


def test_overrides_are_parsed_as_yaml_values():
    cfg = C.build("mappo", overrides=["env.scenario=hard", "train.num_envs=512", "train.lr=3e-4",
                                      "shaping.enabled=false", "network.critic_input=grid"])
    assert cfg["algo"] == "mappo"
    assert cfg["env"]["scenario"] == "hard"
    assert cfg["train"]["num_envs"] == 512
    assert cfg["train"]["lr"] == pytest.approx(3e-4)
    assert cfg["shaping"]["enabled"] is False
    assert cfg["network"]["critic_input"] == "grid"


def test_curriculum_override_and_make_kwargs():
    cfg = C.build("ippo", overrides=["env.scenario=null", "env.n=4"])
    assert C.env_kwargs(cfg) == {"observation": "vector", "view_radius": 3, "n": 4, "pool_size": 4096}


def test_gpu_preset_is_one_flag_away():
    cfg = C.build("ippo", preset="gpu")
    assert cfg["train"]["num_envs"] == 4096
    assert cfg["env"]["scenario"] == "easy"  # the preset changes scale, not the world


def test_presets_layer_in_order_on_the_command_line():
    cfg = C.parse_args("mappo", ["--preset", "hard", "--preset", "gpu", "train.lr=1e-4"])
    assert cfg["env"]["scenario"] == "hard" and cfg["shaping"]["enabled"] is True  # from hard.yaml
    assert cfg["shaping"]["reach_weight"] == 1.0 and cfg["shaping"]["align_weight"] == 1.0
    assert cfg["train"]["num_envs"] == 4096 and cfg["train"]["total_timesteps"] == 200_000_000  # gpu.yaml, later
    assert cfg["train"]["lr"] == 1e-4  # overrides come last


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.num_env=4", "unknown config key 'train.num_env'"),
        ("trian.lr=1", "unknown config key 'trian.lr'"),
        ("train=3", "'train' is a section"),
        ("train.num_envs=0", "train.num_envs must be >= 1"),
        ("train.num_envs=abc", "train.num_envs must be int"),
        ("train.gamma=1.5", "train.gamma must be in [0, 1]"),
        ("algo=dqn", "algo must be one of ('ippo', 'mappo')"),
        ("env.n=4", "set exactly one of env.scenario"),
        ("train.num_minibatches=3", "must be divisible by train.num_minibatches = 3"),
        ("train.lr", "expected key=value"),
        ("shaping.enabled=maybe", "shaping.enabled must be true or false"),
        ("shaping.reach_weight=-1", "shaping.reach_weight must be >= 0"),
    ],
)
def test_bad_overrides_say_what_is_wrong(override, message):
    with pytest.raises(C.ConfigError) as err:
        C.build("ippo", overrides=[override])
    assert message in str(err.value)


def test_unknown_preset_lists_the_available_ones():
    with pytest.raises(C.ConfigError, match="available presets: .*gpu"):
        C.build("ippo", preset="tpu-pod")


def test_config_file_with_unknown_key_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  learning_rate: 0.1\n")
    with pytest.raises(C.ConfigError, match=r"bad\.yaml: unknown config key 'train\.learning_rate'"):
        C.build("ippo", config_files=[path])


def test_command_line_errors_exit_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        C.parse_args("ippo", ["train.num_envs=-2"])
    assert exc.value.code == 2
    assert "train.num_envs must be >= 1" in capsys.readouterr().err

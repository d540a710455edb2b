from tests.foundation import fake_roles

run = fake_roles.stubborn
